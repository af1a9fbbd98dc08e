"""`python -m prefixserve.router --worker-urls ... --policy ...`"""

from prefixserve.router.cli import main

if __name__ == "__main__":
    main()
