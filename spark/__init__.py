"""PySpark pipeline over the analysts' contract (schema `reporting`): per-stream per-day facts
into a Parquet lake, summary tables in `reporting_marts`, charts and an HTML summary.

Never imports `app`: the only interface to the controller is the `reporting` views, read over JDBC.
"""
