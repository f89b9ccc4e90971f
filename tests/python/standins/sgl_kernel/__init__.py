# Stand-in for sgl-kernel (tests only): see ../attnscope_fa_standin.py.
