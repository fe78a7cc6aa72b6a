// Package v1 is runplane's public serverless API, version 1: the bodies the
// queue ingress answers under /v1 (an invocation, the ack of an accepted
// one, a pool), the events of an invocation's server-sent event stream and
// the body of a completion callback. The ingress's OpenAPI document, and the
// client generated from it (queue/ingress/ingressclient), are generated from
// these types.
//
// The types are the callers' view only, apart from the queue's NATS wire
// format and KV records (internal/messages): a field added to an internal
// record reaches no caller until it is added here on purpose. Nothing here
// names a namespace UID, a request hash, a stream, a stream sequence or a
// NATS subject. Version 1 changes only additively: fields and values may be
// added, none is removed or changes type (queue/ingress/testdata/openapi-v1.json
// is the committed contract, and a test fails on a removal).
package v1
