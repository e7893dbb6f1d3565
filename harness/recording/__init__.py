"""Records: outcomes, statuses, results files, the summary and JUnit."""
