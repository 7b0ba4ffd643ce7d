"""The StarForge control plane: admission, ledger, queue and scheduler, dispatch, ingest, stores."""
