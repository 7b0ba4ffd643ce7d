// A StarForge API client in Go: the code buf generates from proto/ with protoc-gen-go and
// protoc-gen-go-grpc, and grpc-go. It lists jobs, watches one to its end and decodes the
// google.rpc details of a refusal.
//
//	STARFORGE_ADDRESS=127.0.0.1:50051 STARFORGE_TOKEN=... go run . list
//	go run . watch JOB_ID
//	go run . get JOB_ID
//
// A refusal prints {"code", "message", "details"} as JSON on stderr and exits 1.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	controlv1 "starforge.dev/gen/go/starforge/control/v1"
	jobv1 "starforge.dev/gen/go/starforge/job/v1"
)

func usage(message string) {
	fmt.Fprintf(os.Stderr, "%s\nusage: go-client list | get|watch JOB_ID\n", message)
	os.Exit(2)
}

func terminal(state jobv1.JobState) bool {
	return state == jobv1.JobState_JOB_STATE_SUCCEEDED || state == jobv1.JobState_JOB_STATE_FAILED ||
		state == jobv1.JobState_JOB_STATE_STOPPED
}

func run(ctx context.Context, client controlv1.ControlServiceClient, command, jobID string) error {
	switch command {
	case "list":
		token := ""
		for {
			page, err := client.ListJobs(ctx, &controlv1.ListJobsRequest{PageSize: 50, PageToken: token})
			if err != nil {
				return err
			}
			for _, job := range page.Jobs {
				fmt.Printf("%s\t%s\t%s\n", job.JobId, job.State, job.Method)
			}
			if token = page.NextPageToken; token == "" {
				return nil
			}
		}
	case "get":
		response, err := client.GetJob(ctx, &controlv1.GetJobRequest{JobId: jobID})
		if err != nil {
			return err
		}
		fmt.Println(protojson.Format(response.Job))
		return nil
	case "watch":
		// After a lost stream, resume with AfterSequence = the last event's sequence.
		stream, err := client.WatchJob(ctx, &controlv1.WatchJobRequest{JobId: jobID})
		if err != nil {
			return err
		}
		for {
			response, err := stream.Recv()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			fmt.Println(response.Job.State)
			if terminal(response.Job.State) {
				return nil
			}
		}
	}
	usage("unknown command " + command)
	return nil
}

// describe turns a refusal into {code, message, details}, decoding the google.rpc details.
func describe(err error) map[string]any {
	s := status.Convert(err)
	details := []map[string]any{}
	for _, d := range s.Details() {
		switch detail := d.(type) {
		case *errdetails.ErrorInfo:
			details = append(details, map[string]any{
				"type": "google.rpc.ErrorInfo", "reason": detail.Reason, "domain": detail.Domain, "metadata": detail.Metadata,
			})
		case *errdetails.BadRequest:
			violations := []map[string]string{}
			for _, v := range detail.FieldViolations {
				violations = append(violations, map[string]string{"field": v.Field, "description": v.Description})
			}
			details = append(details, map[string]any{"type": "google.rpc.BadRequest", "fieldViolations": violations})
		default:
			details = append(details, map[string]any{"type": fmt.Sprintf("%T", d)})
		}
	}
	return map[string]any{"code": canonical(s.Code().String()), "message": s.Message(), "details": details}
}

// canonical spells a grpc-go code name ("NotFound") as gRPC's canonical one ("NOT_FOUND").
func canonical(name string) string {
	var b strings.Builder
	for i, r := range name {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String())
}

func main() {
	address, token := os.Getenv("STARFORGE_ADDRESS"), os.Getenv("STARFORGE_TOKEN")
	if address == "" || token == "" {
		usage("set STARFORGE_ADDRESS and STARFORGE_TOKEN")
	}
	if len(os.Args) < 2 {
		usage("no command")
	}
	command, jobID := os.Args[1], ""
	if len(os.Args) > 2 {
		jobID = os.Args[2]
	}
	if command != "list" && jobID == "" {
		usage(command + " needs a JOB_ID")
	}
	// Plaintext (loopback); for TLS use grpc.WithTransportCredentials(credentials.NewClientTLSFromFile(ca, "")).
	conn, err := grpc.Dial(address, grpc.WithInsecure())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer conn.Close()
	// The scheme of the authorization header is case-insensitive ("bearer" works too).
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
	if err := run(ctx, controlv1.NewControlServiceClient(conn), command, jobID); err != nil {
		out, _ := json.MarshalIndent(describe(err), "", "  ")
		fmt.Fprintln(os.Stderr, string(out))
		os.Exit(1)
	}
}
