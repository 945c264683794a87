"""The job store: jobs, groups, episodes, attempts, trajectories and delivery cursors."""
