pytest_plugins = ["backend_fixtures", "tpch_fixtures"]
