"""`python -m pybeanstalkd`: the same as the pybeanstalkd command."""
import sys

from pybeanstalkd.cli import main

sys.exit(main())
