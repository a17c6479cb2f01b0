"""The shipped site profiles: one YAML file per machine (add a site by adding a file)."""
