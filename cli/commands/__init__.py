"""Command groups of `sf`, one module each; `cli.app` assembles them."""
