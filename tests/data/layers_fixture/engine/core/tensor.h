// core includes nothing else.
