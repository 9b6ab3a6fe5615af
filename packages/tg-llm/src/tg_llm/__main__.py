"""`python -m tg_llm --model F.gguf` (same as `python -m tg.llm`)."""

import sys

from tg_llm.cli import main

sys.exit(main())
