"""Test worker: a torch `@record`-decorated main whose rank RANK raises ValueError("bad shard 7").

raises.py RANK

The other ranks wait to be torn down. `@record` writes the exception to the file named by
TORCHELASTIC_ERROR_FILE (as under torchrun) and re-raises it.
"""
import os
import sys
import time

from torch.distributed.elastic.multiprocessing.errors import record


def load_shard(index: int) -> None:
    raise ValueError(f"bad shard {index}")


@record
def main() -> None:
    if os.environ["RANK"] == sys.argv[1]:
        load_shard(7)
    time.sleep(300)


if __name__ == "__main__":
    main()
