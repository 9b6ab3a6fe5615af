"""`python -m tg.llm --model F.gguf`: chat, `--serve [PORT]`, `--benchmark N` (tg_llm.cli)."""

import sys

from tg_llm.cli import main

sys.exit(main())
