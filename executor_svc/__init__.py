"""Executor services: one gRPC ExecutorService interface, one implementation per kind."""
