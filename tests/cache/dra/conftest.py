from tests.cel_double import install

install()
