package natsaccounts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
)

// The full resolver's requests (nats-server's accClaimsReqSubj and
// accDeleteReqSubj), answered in SYS.
const (
	claimsUpdateSubject = "$SYS.REQ.CLAIMS.UPDATE"
	claimsDeleteSubject = "$SYS.REQ.CLAIMS.DELETE"
)

// Resolver stores account JWTs in the server's full resolver through a
// connection of the queue's SYS user. Every server of a cluster answers; the
// first answer is taken, and a server that has not heard of an account
// asks its peers when a user of it connects.
type Resolver struct {
	// Conn is the SYS user's connection.
	Conn *nats.Conn
	// Trust signs delete requests (the operator's key).
	Trust *Trust
}

// claimsResponse is nats-server's ServerAPIClaimUpdateResponse.
type claimsResponse struct {
	Data *struct {
		Account string `json:"account"`
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"data"`
	Error *struct {
		Account     string `json:"account"`
		Code        int    `json:"code"`
		Description string `json:"description"`
	} `json:"error"`
}

// Push stores an account JWT (a newer one replaces an older one; the
// server applies it to the account's connections at once).
func (r *Resolver) Push(ctx context.Context, accountJWT string) error {
	return r.request(ctx, claimsUpdateSubject, []byte(accountJWT))
}

// Delete removes accounts from the resolver (allow_delete: true); their
// connections are closed.
func (r *Resolver) Delete(ctx context.Context, accounts ...string) error {
	gc := jwt.NewGenericClaims(r.Trust.Operator.Pub)
	gc.Data["accounts"] = accounts
	s, err := gc.Encode(r.Trust.Operator.KeyPair)
	if err != nil {
		return fmt.Errorf("signing the delete of %v: %w", accounts, err)
	}
	return r.request(ctx, claimsDeleteSubject, []byte(s))
}

func (r *Resolver) request(ctx context.Context, subject string, body []byte) error {
	msg, err := r.Conn.RequestWithContext(ctx, subject, body)
	if err != nil {
		return fmt.Errorf("NATS resolver %s: %w", subject, err)
	}
	var resp claimsResponse
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return fmt.Errorf("NATS resolver %s: answer %q: %w", subject, msg.Data, err)
	}
	switch {
	case resp.Error != nil:
		return fmt.Errorf("NATS resolver %s: %d %s", subject, resp.Error.Code, resp.Error.Description)
	case resp.Data == nil:
		return errors.New("NATS resolver " + subject + ": empty answer " + string(msg.Data))
	}
	return nil
}
