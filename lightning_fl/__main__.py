from lightning_fl.apps.cli import main

if __name__ == "__main__":
    main()
