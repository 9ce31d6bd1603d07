"""Looking back at stored outcomes: `explain` for a person, the determinism canary, dead
letters read back, `records`' rows and grader stability."""
