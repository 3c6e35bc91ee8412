"""The checks deploy/check.py runs on rendered jobgate manifests, one module a concern (see
check.py for what they prove together). They read src/config/ and templates/, and change
nothing."""
