package framework

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/runplane/runplane/internal/rawjson"
)

// Attributes an invocation may set to steer the echo framework in tests.
const (
	EchoAttrSleep = "echo.sleep" // a Go duration to sleep before answering
	EchoAttrFail  = "echo.fail"  // answer an error envelope with this text
	EchoAttrCrash = "echo.crash" // "true": exit the process mid-invocation
	// EchoAttrRaw "true": answer with the payload itself as the body and
	// the request's contentType (binary content round trips as it came).
	EchoAttrRaw = "echo.raw"
)

// EchoOptions are process-wide behaviours of the echo framework; attributes
// of one invocation add to them.
type EchoOptions struct {
	Sleep time.Duration
	Fail  string
	Crash bool
	// Exit is called on crash (os.Exit in the binary; a test hook otherwise).
	Exit func(code int)
}

// Echo returns a handler that answers with the request envelope itself as
// the body: the reference framework the sidecar is tested against.
func Echo(opts EchoOptions) HandlerFunc {
	exit := opts.Exit
	if exit == nil {
		exit = os.Exit
	}
	return func(ctx context.Context, req Request) (Response, error) {
		sleep := opts.Sleep
		if v, ok := req.Attributes[EchoAttrSleep]; ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				return Response{StatusCode: 400, Error: fmt.Sprintf("attribute %s: %q is not a duration (e.g. 2s): %v", EchoAttrSleep, v, err)}, nil
			}
			sleep = d
		}
		crash := opts.Crash || req.Attributes[EchoAttrCrash] == "true"
		if crash {
			// Exit without answering: the sidecar sees a broken connection.
			exit(3)
			return Response{}, errors.New("crashed")
		}
		if sleep > 0 {
			t := time.NewTimer(sleep)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return Response{}, ctx.Err()
			case <-t.C:
			}
		}
		fail := opts.Fail
		if v, ok := req.Attributes[EchoAttrFail]; ok {
			fail = v
		}
		if fail != "" {
			return Response{StatusCode: 500, Error: fail}, nil
		}
		if req.Attributes[EchoAttrRaw] == "true" {
			return Response{StatusCode: 200, ContentType: req.ContentType, Body: req.Payload}, nil
		}
		body, err := echoBody(req)
		if err != nil {
			return Response{}, fmt.Errorf("encode echo body: %w", err)
		}
		return Response{StatusCode: 200, ContentType: "application/json", Headers: map[string]string{"x-runplane-echo": "1"}, Body: body}, nil
	}
}

// echoBody is json.Marshal(req), its payload placed as it is when that is
// how json.Marshal writes it (rawjson.Canonical: a byte search), not
// scanned and copied again (~45 ms of a 10 MiB echo).
func echoBody(req Request) ([]byte, error) {
	p, err := rawjson.Canonical(req.Payload)
	if err != nil {
		return nil, err
	}
	req.Payload = p
	return rawjson.Marshal(&req, &req.Payload)
}
