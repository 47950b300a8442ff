"""`python -m recipebox`: serve the app on 127.0.0.1:8000 (development only)."""

from wsgiref.simple_server import make_server

from recipebox.app import create_app


def main() -> None:
    app = create_app()
    with make_server("127.0.0.1", 8000, app) as server:
        print("recipe-box on http://127.0.0.1:8000")
        server.serve_forever()


if __name__ == "__main__":
    main()
