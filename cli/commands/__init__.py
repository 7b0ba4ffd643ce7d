"""Command groups of `sf`, one module each; `cli.main` assembles them."""
