#!/usr/bin/env bash
# Builds the Flink benchmark jobs: fetches Flink 2.3.0's jars (from the PyPI package
# apache-flink-libraries) into WORK, compiles src/*.java into WORK/classes, and prints the
# classpath to run them with. Idempotent: the download and unpacking happen once.
#
#   bench/flink/build.sh [WORK]        (WORK defaults to /var/tmp/flink-work)
#   java -Xmx2g -cp "$(bench/flink/build.sh)" ScorerJob --input ... --output ...
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="$(mkdir -p "${1:-/var/tmp/flink-work}" && cd "${1:-/var/tmp/flink-work}" && pwd)"
version=2.3.0
lib="$work/flink-$version/lib"

if [[ ! -f "$lib/flink-dist-$version.jar" ]]; then
    if ! ls "$work"/dl/apache_flink_libraries-"$version"-*.whl >/dev/null 2>&1; then
        pip download --quiet --no-deps "apache-flink-libraries==$version" -d "$work/dl" >&2
    fi
    rm -rf "$lib" && mkdir -p "$lib"
    unzip -q -j -o "$work"/dl/apache_flink_libraries-"$version"-*.whl 'pyflink/lib/*.jar' -d "$lib"
fi

# flink-dist has the DataStream API, the MiniCluster and both state backends (RocksDB's
# native library included); the file source and sink are in flink-connector-files; log4j
# takes Flink's slf4j logging.
cp="$lib/flink-dist-$version.jar:$lib/flink-connector-files-$version.jar"
for jar in "$lib"/log4j-api-*.jar "$lib"/log4j-core-*.jar "$lib"/log4j-slf4j-impl-*.jar; do
    cp="$cp:$jar"
done

rm -rf "$work/classes" && mkdir -p "$work/classes"
javac -nowarn -Xlint:-options --release 17 -cp "$cp" -d "$work/classes" "$here"/src/*.java >&2
cp "$here/log4j2.properties" "$work/classes/"

echo "$work/classes:$cp"
