"""Echo framework in Python: answers every invocation with its envelope.

Run: RUNPLANE_FRAMEWORK_SOCKET=/tmp/f.sock python3 framework/python/echo.py
The attribute ``echo.fail`` makes it answer an error (as framework-echo does).
"""

import runplane_framework as rf


@rf.handler
def echo(req: rf.Request) -> rf.Response:
    fail = req.attributes.get("echo.fail")
    if fail:
        return rf.Response(statusCode=500, error=fail)
    return rf.Response(
        statusCode=200,
        contentType="application/json",
        headers={"x-runplane-echo": "1"},
        body=req.to_dict(),
    )


if __name__ == "__main__":
    rf.serve(echo)
