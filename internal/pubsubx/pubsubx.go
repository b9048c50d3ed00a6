// Package pubsubx connects to Pub/Sub the way every topk binary does: the
// official emulator when PUBSUB_EMULATOR_HOST is set, an in-process fake
// (cloud.google.com/go/pubsub/v2/pstest) in local mode, or Google Cloud
// itself; and creates the topics and subscriptions a run needs.
package pubsubx

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"cloud.google.com/go/pubsub/v2"
	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// EnvEmulator is the variable the official clients read for the emulator.
const EnvEmulator = "PUBSUB_EMULATOR_HOST"

// Embedded is an in-process Pub/Sub fake listening on a loopback port, so
// that anything in the process (the Prism workers, the API) can reach it by
// address as it would the emulator.
type Embedded struct {
	Srv  *pstest.Server
	Addr string
}

// StartEmbedded starts the fake. Close it when done.
func StartEmbedded() *Embedded {
	srv := pstest.NewServer()
	return &Embedded{Srv: srv, Addr: srv.Addr}
}

// Close stops the fake.
func (e *Embedded) Close() error { return e.Srv.Close() }

// EmulatorAddr returns PUBSUB_EMULATOR_HOST, or "" when unset.
func EmulatorAddr() string { return os.Getenv(EnvEmulator) }

// NewClient connects to addr (an emulator or a fake) without credentials, or
// to Google Cloud with default credentials when addr is "".
func NewClient(ctx context.Context, project, addr string) (*pubsub.Client, error) {
	if addr == "" {
		return pubsub.NewClient(ctx, project)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("pubsub dial %s: %w", addr, err)
	}
	c, err := pubsub.NewClient(ctx, project, option.WithGRPCConn(conn), option.WithoutAuthentication())
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("pubsub client: %w", err)
	}
	return c, nil
}

// TopicName is the full resource name of a topic.
func TopicName(project, topic string) string { return "projects/" + project + "/topics/" + topic }

// SubscriptionName is the full resource name of a subscription.
func SubscriptionName(project, sub string) string {
	return "projects/" + project + "/subscriptions/" + sub
}

// ParseSubscription splits "projects/P/subscriptions/S" into P and S.
func ParseSubscription(name string) (project, sub string, err error) {
	parts := strings.Split(name, "/")
	if len(parts) != 4 || parts[0] != "projects" || parts[2] != "subscriptions" || parts[1] == "" || parts[3] == "" {
		return "", "", fmt.Errorf("subscription %q is not projects/P/subscriptions/S", name)
	}
	return parts[1], parts[3], nil
}

// EnsureTopic creates the topic unless it exists.
func EnsureTopic(ctx context.Context, c *pubsub.Client, topic string) error {
	_, err := c.TopicAdminClient.CreateTopic(ctx, &pb.Topic{Name: TopicName(c.Project(), topic)})
	if err != nil && status.Code(err) != codes.AlreadyExists {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	return nil
}

// EnsureSubscription creates a pull subscription to topic unless it exists.
func EnsureSubscription(ctx context.Context, c *pubsub.Client, sub, topic string, ackDeadlineSeconds int32) error {
	if ackDeadlineSeconds == 0 {
		ackDeadlineSeconds = 60
	}
	_, err := c.SubscriptionAdminClient.CreateSubscription(ctx, &pb.Subscription{
		Name:               SubscriptionName(c.Project(), sub),
		Topic:              TopicName(c.Project(), topic),
		AckDeadlineSeconds: ackDeadlineSeconds,
	})
	if err != nil && status.Code(err) != codes.AlreadyExists {
		return fmt.Errorf("create subscription %s: %w", sub, err)
	}
	return nil
}

// ErrNoEmulator is returned by RequireEmulator when none is configured.
var ErrNoEmulator = errors.New(EnvEmulator + " is not set")
