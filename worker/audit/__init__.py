"""Looking back at stored outcomes: `explain` for a person, the determinism canary."""
