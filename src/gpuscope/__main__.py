from gpuscope.cli import run

run()
