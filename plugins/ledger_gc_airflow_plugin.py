"""The Airflow plugin of ledger-gc (the "Ledger GC" view and its endpoints)."""
