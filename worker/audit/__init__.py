"""Looking back at stored outcomes: `explain` for a person, the determinism canary, dead
letters read back (letters), `records`' rows (record_rows), grader stability read from a
store or record lines (stability_sources), and the CSV writer (safe_csv)."""
