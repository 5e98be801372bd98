"""Parses an OpenMetrics exposition with the official Prometheus Python client's parser.

Reads the text `/metrics` served from standard input, parses it with
`prometheus_client.openmetrics.parser.text_string_to_metric_families` (which rejects anything
that is not valid OpenMetrics, `# EOF` included) and prints one JSON object: every family
with its name, type, unit and samples, for the Rust test to compare with `catalog/status`.

Usage: parse_metrics.py < exposition
"""

import json
import math
import sys

from prometheus_client.openmetrics.parser import text_string_to_metric_families


def number(value):
    # JSON has no infinity; the +Inf bucket's count is finite anyway, but stay exact.
    return value if math.isfinite(value) else str(value)


def main():
    families = []
    for family in text_string_to_metric_families(sys.stdin.read()):
        families.append(
            {
                "name": family.name,
                "type": family.type,
                "unit": family.unit,
                "samples": [
                    {"name": sample.name, "labels": sample.labels, "value": number(sample.value)}
                    for sample in family.samples
                ],
            }
        )
    json.dump({"families": families}, sys.stdout)


if __name__ == "__main__":
    main()
