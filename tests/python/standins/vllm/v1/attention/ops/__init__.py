# Stand-in for vLLM (tests only): see attnscope_mla_standin.py at the stand-ins root.
