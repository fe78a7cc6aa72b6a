// Package ingressclient is a Go client of the queue ingress API, generated
// by oapi-codegen from the OpenAPI document the ingress serves at
// /openapi.json (itself generated from the ingress's Go types). Do not
// edit client.gen.go: regenerate it with
//
//	go test ./queue/ -run TestGeneratedClient -update-client
//
// which also fails, without the flag, when the committed client differs
// from what the served document generates.
package ingressclient
