"""The method catalog: one versioned declaration per method under recipes/catalog/<framework>/<method>/."""
