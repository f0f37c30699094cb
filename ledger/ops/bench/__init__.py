"""Benchmarks behind ``python manage.py bench ledger|knowledge``. They print figures, they assert
nothing, and they use only the apps' public services and selectors plus a bulk loader for scale:

common (output, scratch database, client processes, raw baseline) < loader (COPY of generated
histories) < appends, decisions < ledger; knowledge.
"""
