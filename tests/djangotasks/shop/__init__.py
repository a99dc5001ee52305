"""The test project's app: its tasks module holds the Django tasks."""
