import sys

from pybeanstalkd.cli import main

sys.exit(main())
