"""The verifier: ``tests/test.sh`` run where grading says (``script``), the reward it
writes (``reward``, ``verdict``), its test reports and SWE-bench lists (``reports``,
``report_checks``, ``swebench``, ``test_logs``), and what is collected for it (``collect``,
``service_artifacts``)."""
