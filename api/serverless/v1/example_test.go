package v1_test

import (
	"encoding/json"
	"fmt"

	v1 "github.com/runplane/runplane/api/serverless/v1"
)

// A caller decodes GET /v1/namespaces/{namespace}/invocations/{id} (and a
// sync invoke's 200, a stream's result event, a callback's body) into an
// Invocation.
func ExampleInvocation() {
	body := `{"invocationID":"job-42","namespace":"team-a","pool":"sd-webui","mode":"sync","state":"succeeded","worker":"sd-webui-7d9f-x2k",
		"attempt":1,"response":{"statusCode":200,"contentType":"application/json","body":{"image":"s3://out/42.png"}},
		"acceptedAt":"2026-11-28T10:00:00Z","updatedAt":"2026-11-28T10:00:03Z"}`
	var inv v1.Invocation
	if err := json.Unmarshal([]byte(body), &inv); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(inv.State, inv.State.Terminal(), inv.Response.StatusCode, string(inv.Response.Body), inv.UpdatedAt.Sub(inv.AcceptedAt))
	// Output: succeeded true 200 {"image":"s3://out/42.png"} 3s
}

// A stream's events carry their data as JSON: a gap event says which
// chunks will never come.
func ExampleStreamGap() {
	var gap v1.StreamGap
	if err := json.Unmarshal([]byte(`{"attempt":1,"firstRetained":17,"missing":3,"reason":"evicted"}`), &gap); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s: %d chunks of attempt %d lost, resume at id %d\n", v1.EventGap, gap.Missing, gap.Attempt, gap.FirstRetained)
	// Output: gap: 3 chunks of attempt 1 lost, resume at id 17
}
