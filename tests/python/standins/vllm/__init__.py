# Stand-in for vLLM (tests only): see ../attnscope_fa_standin.py.
