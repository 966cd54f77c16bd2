"""Airflow glue: settings from connections, task callables. Imports Airflow lazily."""
