"""The bad-input corpus: broken and mutated recordings, built at test time, run through every command that reads one.

``recordings`` makes the valid files everything starts from, ``cases`` the
bad files made from them, ``commands`` the command lines a file goes through
and what each run must (and must never) do. See ``test_bad_files``.
"""
