#!/usr/bin/env bash
# A local single-node Apache Kafka broker (KRaft, combined broker+controller) on 127.0.0.1,
# for the Kafka tests, the bench and development. Needs Java 17+ and Maven; the broker's
# jars come from Maven Central (no Docker, no tarball download), cached per version under
# .cache/kafka/<version>/libs and reused.
#
#   scripts/kafka-local.sh start    fetch (first time), format storage (first time), start, wait
#   scripts/kafka-local.sh stop     stop the broker started from the same KAFKA_STATE_DIR
#   scripts/kafka-local.sh status   exit 0 when the broker answers, 1 otherwise
#   scripts/kafka-local.sh fetch    only fetch the jars
#   scripts/kafka-local.sh clean    stop and delete the broker's data (the jar cache is kept)
#
# Environment (defaults in brackets):
#   KAFKA_PORT [19092]  KAFKA_CONTROLLER_PORT [KAFKA_PORT+1]  KAFKA_VERSION [4.1.1]
#   KAFKA_STATE_DIR [.cache/kafka/run-$KAFKA_PORT]: data, logs, server.properties, pid file
#   KAFKA_HEAP [512m]  KAFKA_START_TIMEOUT_S [120]
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
KAFKA_VERSION="${KAFKA_VERSION:-4.1.1}"
LOG4J_VERSION="${LOG4J_VERSION:-2.25.3}"
KAFKA_PORT="${KAFKA_PORT:-19092}"
KAFKA_CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-$((KAFKA_PORT + 1))}"
KAFKA_HEAP="${KAFKA_HEAP:-512m}"
KAFKA_START_TIMEOUT_S="${KAFKA_START_TIMEOUT_S:-120}"
CACHE_DIR="${KAFKA_CACHE_DIR:-$ROOT/.cache/kafka}"
LIBS="$CACHE_DIR/$KAFKA_VERSION/libs"
STATE="${KAFKA_STATE_DIR:-$CACHE_DIR/run-$KAFKA_PORT}"
PID_FILE="$STATE/kafka.pid"
# Fixed, so a restarted broker finds its own storage (any base64 UUID of 16 bytes works).
CLUSTER_ID="cnVubGVkZ2VyLWthZmthAA"

say() { echo "kafka-local: $*" >&2; }

port_open() {
  # bash's /dev/tcp: no nc or kafka tooling needed to ask whether the listener answers.
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

running_pid() {
  [ -f "$PID_FILE" ] || return 1
  local pid
  pid="$(cat "$PID_FILE")"
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

fetch() {
  if [ -f "$LIBS/.complete" ]; then return 0; fi
  command -v mvn >/dev/null || { say "mvn not found: install Maven (and Java 17+)"; exit 1; }
  command -v java >/dev/null || { say "java not found: install Java 17+"; exit 1; }
  local work="$CACHE_DIR/$KAFKA_VERSION"
  mkdir -p "$work"
  rm -rf "$LIBS"
  # A throwaway pom whose only purpose is to name the broker and its logging backend.
  cat >"$work/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>runledger.local</groupId>
  <artifactId>kafka-broker</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <!-- The broker ships with slf4j-api 1.7, so its log4j2 binding is log4j-slf4j-impl
         (slf4j2-impl would find no 1.7 binder and the broker would log nothing). -->
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>$KAFKA_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-core</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
  </dependencies>
</project>
EOF
  say "fetching Apache Kafka $KAFKA_VERSION from Maven Central into $LIBS (first run only)"
  mvn -B -q -f "$work/pom.xml" \
    org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$LIBS" >"$work/fetch.log" 2>&1 || {
    tail -n 40 "$work/fetch.log" >&2
    say "could not fetch the broker (log: $work/fetch.log)"
    exit 1
  }
  touch "$LIBS/.complete"
}

write_config() {
  mkdir -p "$STATE/data" "$STATE/logs"
  cat >"$STATE/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$STATE/data
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
auto.create.topics.enable=false
# A test cluster: consumers join their group at once instead of waiting 3 s for others.
group.initial.rebalance.delay.ms=0
log.flush.interval.messages=9223372036854775807
num.io.threads=2
num.network.threads=2
background.threads=4
num.recovery.threads.per.data.dir=1
EOF
  cat >"$STATE/log4j2.properties" <<EOF
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = $STATE/logs/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = WARN
logger.apache.name = org.apache.kafka
logger.apache.level = WARN
logger.started.name = kafka.server.KafkaRaftServer
logger.started.level = INFO
EOF
}

java_args() {
  JAVA_ARGS=(-Xmx"$KAFKA_HEAP" -Xms128m -XX:+UseG1GC -Djava.awt.headless=true
    -Dlog4j2.configurationFile="$STATE/log4j2.properties" -Dkafka.logs.dir="$STATE/logs"
    -cp "$LIBS/*")
}

start() {
  if pid="$(running_pid)"; then
    if port_open "$KAFKA_PORT"; then
      say "already running (pid $pid) on 127.0.0.1:$KAFKA_PORT"
      echo "127.0.0.1:$KAFKA_PORT"
      return 0
    fi
    say "the broker of $PID_FILE (pid $pid) does not answer; stopping it first"
    stop
  fi
  if port_open "$KAFKA_PORT"; then
    say "127.0.0.1:$KAFKA_PORT is taken by another process; set KAFKA_PORT to a free port"
    exit 1
  fi
  fetch
  write_config
  java_args
  if [ ! -f "$STATE/data/meta.properties" ]; then
    java "${JAVA_ARGS[@]}" kafka.tools.StorageTool format --ignore-formatted -t "$CLUSTER_ID" \
      -c "$STATE/server.properties" >"$STATE/logs/format.log" 2>&1 || {
      cat "$STATE/logs/format.log" >&2
      say "formatting the KRaft storage failed"
      exit 1
    }
  fi
  # A fresh log per start: readiness below is read from it.
  [ -f "$STATE/logs/server.log" ] && mv "$STATE/logs/server.log" "$STATE/logs/server.log.prev"
  # setsid: the broker outlives the shell (and the jest worker) that started it, in its own
  # process group, so `stop` ends exactly it.
  setsid java "${JAVA_ARGS[@]}" kafka.Kafka "$STATE/server.properties" \
    >"$STATE/logs/stdout.log" 2>&1 </dev/null &
  echo $! >"$PID_FILE"
  local pid deadline
  pid="$(cat "$PID_FILE")"
  deadline=$((SECONDS + KAFKA_START_TIMEOUT_S))
  until port_open "$KAFKA_PORT" && grep -q 'Kafka Server started' "$STATE/logs/server.log" 2>/dev/null; do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -n 30 "$STATE/logs/stdout.log" "$STATE/logs/server.log" >&2 2>/dev/null || true
      say "the broker exited during start-up (logs: $STATE/logs)"
      rm -f "$PID_FILE"
      exit 1
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      say "the broker did not answer on 127.0.0.1:$KAFKA_PORT within ${KAFKA_START_TIMEOUT_S}s (logs: $STATE/logs)"
      kill -9 "$pid" 2>/dev/null || true
      rm -f "$PID_FILE"
      exit 1
    fi
    sleep 0.2
  done
  say "Apache Kafka $KAFKA_VERSION listening on 127.0.0.1:$KAFKA_PORT (pid $pid, data $STATE/data)"
  echo "127.0.0.1:$KAFKA_PORT"
}

stop() {
  local pid
  if ! pid="$(running_pid)"; then
    rm -f "$PID_FILE"
    say "not running"
    return 0
  fi
  # SIGTERM: a controlled shutdown that closes the logs cleanly; SIGKILL if it hangs.
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 150); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  if kill -0 "$pid" 2>/dev/null; then
    say "the broker did not stop within 30 s; killing it"
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$PID_FILE"
  say "stopped (pid $pid)"
}

status() {
  local pid
  if pid="$(running_pid)" && port_open "$KAFKA_PORT"; then
    say "running (pid $pid) on 127.0.0.1:$KAFKA_PORT"
    echo "127.0.0.1:$KAFKA_PORT"
    return 0
  fi
  say "not running"
  return 1
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  fetch) fetch ;;
  clean)
    stop
    rm -rf "$STATE"
    ;;
  *)
    echo "usage: $0 start|stop|status|fetch|clean" >&2
    exit 2
    ;;
esac
