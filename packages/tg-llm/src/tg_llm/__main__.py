"""`python -m tg_llm --model F.gguf` (same as `python -m tg.llm`)."""

import sys

try:
    from tg_llm.cli import main

    sys.exit(main())
except KeyboardInterrupt:  # Ctrl-C during the imports: no traceback
    sys.exit(130)
