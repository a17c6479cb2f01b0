"""Side effects of running a study: the workspace on disk, scheduler commands with
retries, the local executor, submission, tracking, failure diagnosis, the batch probe."""
