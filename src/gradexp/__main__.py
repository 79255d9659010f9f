"""`python -m gradexp` is the `gradexp` command."""

from gradexp.app import main

if __name__ == "__main__":
    main()
