pytest_plugins = ["backend_fixtures"]
