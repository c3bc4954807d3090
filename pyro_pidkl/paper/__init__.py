"""The paper's study: experiments as data, the honest reproduction protocol, and the
``pidkl`` command line. The core library never imports this package."""
