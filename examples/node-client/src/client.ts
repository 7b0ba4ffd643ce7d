// A StarForge API client in Node.js: native gRPC over HTTP/2 (@connectrpc/connect-node) with the
// TypeScript that protoc-gen-es generates from proto/ into gen/ts. No StarForge code is involved.
//
//   STARFORGE_ADDRESS=127.0.0.1:50051 STARFORGE_TOKEN=... node dist/client.mjs list
//   node dist/client.mjs copy JOB_ID     submit a copy of a job, print the new id
//   node dist/client.mjs logs JOB_ID     follow its logs until it ends
//   node dist/client.mjs watch JOB_ID    print each state change until it ends
//   node dist/client.mjs get JOB_ID      the job as JSON
//
// A refusal prints its code, message and google.rpc details (ErrorInfo, BadRequest) as JSON on
// stderr and exits 1. STARFORGE_CA_FILE (PEM) turns on TLS.

import { readFileSync } from "node:fs";
import { randomUUID } from "node:crypto";
import { create, toJsonString } from "@bufbuild/protobuf";
import { BinaryReader } from "@bufbuild/protobuf/wire";
import { Code, ConnectError, createClient, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import {
  ControlService,
  GetJobRequestSchema,
  ListJobsRequestSchema,
  StreamJobLogsRequestSchema,
  SubmitJobRequestSchema,
  WatchJobRequestSchema,
} from "../../../gen/ts/starforge/control/v1/control_service_pb.js";
import { JobSchema, type Job } from "../../../gen/ts/starforge/job/v1/job_pb.js";
import { JobState } from "../../../gen/ts/starforge/job/v1/job_state_pb.js";

const TERMINAL = new Set([JobState.SUCCEEDED, JobState.FAILED, JobState.STOPPED]);

function env(name: string): string {
  const value = process.env[name] ?? "";
  if (!value) usage(`set ${name}`);
  return value;
}

function usage(message: string): never {
  process.stderr.write(`${message}\nusage: client.mjs list | get|copy|logs|watch JOB_ID\n`);
  process.exit(2);
}

function connect() {
  const token = env("STARFORGE_TOKEN");
  const caFile = process.env.STARFORGE_CA_FILE ?? "";
  // The scheme of the authorization header is case-insensitive ("bearer" works too).
  const auth: Interceptor = (next) => (req) => {
    req.header.set("authorization", `Bearer ${token}`);
    return next(req);
  };
  const transport = createGrpcTransport({
    baseUrl: `${caFile ? "https" : "http"}://${env("STARFORGE_ADDRESS")}`,
    interceptors: [auth],
    nodeOptions: caFile ? { ca: readFileSync(caFile) } : {},
  });
  return createClient(ControlService, transport);
}

const stateName = (state: JobState): string => `JOB_STATE_${JobState[state]}`;

async function* listJobs(client: ReturnType<typeof connect>): AsyncGenerator<Job> {
  let pageToken = "";
  do {
    const page = await client.listJobs(create(ListJobsRequestSchema, { pageSize: 50, pageToken }));
    yield* page.jobs;
    pageToken = page.nextPageToken;
  } while (pageToken);
}

async function run(command: string, jobId: string): Promise<void> {
  const client = connect();
  switch (command) {
    case "list":
      for await (const job of listJobs(client)) {
        process.stdout.write(`${job.jobId}\t${stateName(job.state)}\t${job.method}\n`);
      }
      return;
    case "get": {
      const { job } = await client.getJob(create(GetJobRequestSchema, { jobId }));
      process.stdout.write(`${toJsonString(JobSchema, job!, { prettySpaces: 2 })}\n`);
      return;
    }
    case "copy": {
      // The job's admitted spec, submitted again; the request id makes a retried call idempotent.
      const { job } = await client.getJob(create(GetJobRequestSchema, { jobId }));
      const submitted = await client.submitJob(
        create(SubmitJobRequestSchema, { spec: job!.spec, requestId: randomUUID() }),
      );
      process.stdout.write(`${submitted.job!.jobId}\n`);
      return;
    }
    case "logs":
      for await (const response of client.streamJobLogs(create(StreamJobLogsRequestSchema, { jobId, follow: true }))) {
        for (const line of response.lines) process.stdout.write(`${line.text}\n`);
      }
      return;
    case "watch":
      // After a lost stream, resume with afterSequence = the last event's sequence.
      for await (const response of client.watchJob(create(WatchJobRequestSchema, { jobId }))) {
        process.stdout.write(`${stateName(response.job!.state)}\n`);
        if (TERMINAL.has(response.job!.state)) return;
      }
      return;
    default:
      usage(`unknown command ${command}`);
  }
}

// google.rpc error details, decoded from their wire format: the messages are small and stable,
// so a client needs no generated code for them (field numbers from google/rpc/error_details.proto).
type Detail = { type: string; [key: string]: unknown };

function decodeErrorInfo(bytes: Uint8Array): Detail {
  const out = { type: "google.rpc.ErrorInfo", reason: "", domain: "", metadata: {} as Record<string, string> };
  const reader = new BinaryReader(bytes);
  while (reader.pos < reader.len) {
    const [field, wireType] = reader.tag();
    if (field === 1) out.reason = reader.string();
    else if (field === 2) out.domain = reader.string();
    else if (field === 3) {
      const entry = new BinaryReader(reader.bytes());
      let key = "";
      let value = "";
      while (entry.pos < entry.len) {
        const [f, w] = entry.tag();
        if (f === 1) key = entry.string();
        else if (f === 2) value = entry.string();
        else entry.skip(w);
      }
      out.metadata[key] = value;
    } else reader.skip(wireType);
  }
  return out;
}

function decodeBadRequest(bytes: Uint8Array): Detail {
  const violations: { field: string; description: string }[] = [];
  const reader = new BinaryReader(bytes);
  while (reader.pos < reader.len) {
    const [field, wireType] = reader.tag();
    if (field !== 1) {
      reader.skip(wireType);
      continue;
    }
    const v = new BinaryReader(reader.bytes());
    const violation = { field: "", description: "" };
    while (v.pos < v.len) {
      const [f, w] = v.tag();
      if (f === 1) violation.field = v.string();
      else if (f === 2) violation.description = v.string();
      else v.skip(w);
    }
    violations.push(violation);
  }
  return { type: "google.rpc.BadRequest", fieldViolations: violations };
}

const DECODERS: Record<string, (bytes: Uint8Array) => Detail> = {
  "google.rpc.ErrorInfo": decodeErrorInfo,
  "google.rpc.BadRequest": decodeBadRequest,
};

function describe(error: ConnectError): object {
  const details = error.details.map((d) => {
    if ("desc" in d) return { type: d.desc.typeName };
    const decode = DECODERS[d.type];
    return decode ? decode(d.value) : { type: d.type };
  });
  // gRPC's canonical code names (NOT_FOUND), as every gRPC library prints them.
  const code = Code[error.code].replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase();
  return { code, message: error.rawMessage, details };
}

const [command = "", jobId = ""] = process.argv.slice(2);
if (!command) usage("no command");
if (command !== "list" && !jobId) usage(`${command} needs a JOB_ID`);
try {
  await run(command, jobId);
} catch (e) {
  const error = ConnectError.from(e);
  process.stderr.write(`${JSON.stringify(describe(error), null, 2)}\n`);
  process.exit(1);
}
