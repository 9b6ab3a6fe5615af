"""`python -m tg.llm --model F.gguf`: chat, `--serve [PORT]`, `--benchmark N` (tg_llm.cli)."""

import sys

try:
    from tg_llm.cli import main

    sys.exit(main())
except KeyboardInterrupt:  # Ctrl-C during the imports: no traceback
    sys.exit(130)
