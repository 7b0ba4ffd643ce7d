"""Session fixtures that start real backends (dockerd, ...) for integration tests."""
