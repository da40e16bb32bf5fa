package agent

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
)

func TestCheckPubAck(t *testing.T) {
	cases := []struct {
		name    string
		reply   string
		wantErr string // "" for none
	}{
		{"ack", `{"stream":"results","seq":12}`, ""},
		{"duplicate ack", `{"stream":"results","seq":12,"duplicate":true}`, ""},
		{"ack with domain", `{"stream":"results","domain":"hub","seq":1}`, ""},
		{"error", `{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"}}`, "maximum messages exceeded"},
		{"error with stream", `{"stream":"results","error":{"code":400,"err_code":10060,"description":"expected stream does not match"}}`, "expected stream does not match"},
		{"empty", ``, "unexpected reply"},
		{"garbage", `hello`, "unexpected reply"},
		{"other json", `{"type":"io.nats.jetstream.api.v1.account_info_response"}`, "unexpected reply"},
		{"undecodable error", `{"error":`, "undecodable reply"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := checkPubAck([]byte(c.reply))
			switch {
			case c.wantErr == "" && err != nil:
				t.Errorf("checkPubAck(%s) = %v, want nil", c.reply, err)
			case c.wantErr != "" && (err == nil || !contains(err.Error(), c.wantErr)):
				t.Errorf("checkPubAck(%s) = %v, want an error with %q", c.reply, err, c.wantErr)
			}
		})
	}
	var apiErr *jetstream.APIError
	if err := checkPubAck([]byte(`{"error":{"code":503,"err_code":10077,"description":"x"}}`)); !errors.As(err, &apiErr) || apiErr.Code != 503 {
		t.Errorf("error ack gives %v, want the stream's APIError", err)
	}
}

// A final result is stored in the results stream with its message id, so a
// publish repeated after a lost acknowledgement is not stored twice.
func TestFinalStoredWithMsgID(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a, _ := h.startAgent("msgid1", nil)
	h.send(api.NodeCommandSubject("msgid1", "ping", "echo"), echo("jmsgid"))
	if r := h.final("jmsgid", "msgid1", 10*time.Second); r.Status != api.StepSuccess {
		t.Fatalf("result %+v, want success", r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := h.js.Stream(ctx, api.StreamResults)
	if err != nil {
		t.Fatal(err)
	}
	subject := api.ResultSubject("jmsgid", 0, "msgid1")
	stored, err := stream.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		t.Fatalf("stored result: %v", err)
	}
	const wantID = "jmsgid.0.msgid1.1"
	if got := stored.Header.Get(nats.MsgIdHdr); got != wantID {
		t.Errorf("stored %s = %q, want %q", nats.MsgIdHdr, got, wantID)
	}
	// The same message again, as a retry after a lost ack would send it:
	// acknowledged, not stored a second time.
	again := &nats.Msg{Subject: subject, Data: stored.Data, Header: nats.Header{nats.MsgIdHdr: {wantID}}}
	if err := a.publishStored(again); err != nil {
		t.Fatalf("publishing again: %v", err)
	}
	after, err := stream.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		t.Fatal(err)
	}
	if after.Sequence != stored.Sequence {
		t.Errorf("a repeated publish was stored again: sequence %d, then %d", stored.Sequence, after.Sequence)
	}
	// A new id is stored.
	other := &nats.Msg{Subject: subject, Data: stored.Data, Header: nats.Header{nats.MsgIdHdr: {"other"}}}
	if err := a.publishStored(other); err != nil {
		t.Fatalf("publishing with a new id: %v", err)
	}
	if last, err := stream.GetLastMsgForSubject(ctx, subject); err != nil || last.Sequence == stored.Sequence {
		t.Errorf("a publish with a new id was not stored (%v)", err)
	}
	// Nothing captures this subject: an error, not an acknowledgement.
	if err := a.publishStored(&nats.Msg{Subject: "nostream.x", Data: []byte("x")}); err == nil {
		t.Error("publishing where no stream listens succeeded")
	}
}
