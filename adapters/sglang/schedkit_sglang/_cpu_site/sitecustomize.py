# Put this directory on PYTHONPATH to run SGLang on CPU: see schedkit_sglang.cpu.
from schedkit_sglang.cpu import install

install()
