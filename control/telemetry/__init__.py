"""What jobs report: log lines, metric points, samples; applied once per (attempt, seq)."""
