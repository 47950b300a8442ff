import io
import json
import unittest
from wsgiref.util import setup_testing_defaults

from recipebox.app import create_app


def call(app, method="GET", path="/"):
    environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "wsgi.input": io.BytesIO()}
    setup_testing_defaults(environ)
    seen = {}

    def start_response(status, headers):
        seen["status"] = status

    body = b"".join(app(environ, start_response))
    return seen["status"], body


class AppTest(unittest.TestCase):
    def test_index(self):
        status, body = call(create_app())
        self.assertEqual(status, "200 OK")
        self.assertEqual(json.loads(body)["name"], "recipe-box")

    def test_unknown_path_is_404(self):
        status, _ = call(create_app(), path="/nope")
        self.assertTrue(status.startswith("404"))


if __name__ == "__main__":
    unittest.main()
