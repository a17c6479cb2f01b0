"""The results store and what it holds over time: run attempts and their provenance, the
regression gate, timelines, change points, slow nodes, the best configurations, the
prediction ledger, queue waits, and results imported from other tools (imports/)."""
