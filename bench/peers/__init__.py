"""Peer drivers run with the peers' own virtualenv (build/bench-peers), inside a loopback-only netns."""
