"""Files: input shards and eval files read, OUTPUT checked (`safety`), staged and published
atomically (`staging`), and the index that a later `--against` run reads and verifies (`index`,
`stamps`)."""
