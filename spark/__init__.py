"""The PySpark data source for tidelog topics."""
