"""Entry points: the `gang-scheduler` command line (main), its `simulate` and `demo`
commands (simulate, demo). Nothing imports this package but the console script.
"""
